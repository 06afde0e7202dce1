"""The request level's engine, where it really differs from the task level's: replaying a
trace of arrivals and steps through a ``RequestScheduler`` (``replay``), and playing the
runner for one in a simulation (``simulate``). Everything else is written once over both."""

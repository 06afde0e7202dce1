"""A check suite, as the engine runs it: ``suite`` finds the traces and their goldens,
``staged`` writes out what the staged commit holds, ``trace`` checks one trace (a
``Verdict`` of facts), ``golden`` compares a replay with its golden step by step, and
``runner`` checks a suite's jobs here or on the pool's workers. The app words the verdicts."""

"""The engine: replaying a trace through a policy, simulating a workload, measuring both.

Imports the model, the policies and the formats; never the app.
"""

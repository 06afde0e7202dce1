"""Old home of the vLLM recorder, kept so that existing ``--scheduler-cls`` settings load;
the runtimes live in ``schedcli.runtimes`` now."""

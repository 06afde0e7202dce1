"""vLLM 0.33 (the ``vllm`` extra): ``policy`` runs its v1 scheduler as the request-level
policy ``-p vllm``; ``recorder`` records a live engine's scheduler calls
(``--scheduler-cls schedcli.runtimes.vllm.recorder.RecordingVllmScheduler``). Importing
this package imports neither vLLM nor them."""

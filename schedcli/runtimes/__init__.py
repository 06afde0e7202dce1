"""Outside runtimes, one home each: ``executorch`` (the C++ recorder header, shipped as
package data) and ``vllm`` (vLLM's scheduler as the request-level policy ``-p vllm``, and
a recorder that runs inside a live vLLM engine). A runtime's own package is needed only
by the modules that drive it."""

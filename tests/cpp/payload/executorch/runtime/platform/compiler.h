// schedcli's stand-in for ExecuTorch's runtime/platform/compiler.h: only ET_EXPERIMENTAL,
// the attribute later upstream puts on the batching interface (a [[deprecated]] with this
// message), so the tests build against it as users will.
#pragma once

#define ET_EXPERIMENTAL [[deprecated("This API is experimental and may change without notice.")]]

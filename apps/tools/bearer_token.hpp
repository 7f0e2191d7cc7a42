#pragma once
// The metrics endpoint's optional bearer token (rw-node --metrics-token-file): a
// request's Authorization field against the token, in constant time.

#include <string>
#include <string_view>

namespace rw::tools {

/// Whether `authorization` (an Authorization field's value) is "Bearer <token>" (the
/// scheme in any case, RFC 6750). The comparison takes the same time whatever the two
/// hold and however long they are: both are hashed (BLAKE2b) and the hashes compared
/// with sodium_memcmp.
bool bearer_token_matches(std::string_view authorization, const std::string& token);

} // namespace rw::tools

#pragma once
/// POSIX-shell quoting, shared by --dry-run output, the mpirun command line
/// and the remote agent command sent over SSH.
#include <string>
#include <vector>

namespace hvd::launcher {

/// Quotes one word for a POSIX shell: words made only of letters, digits and
/// `@%+=:,./-_^` stay as they are; anything else is wrapped in single quotes
/// ('it'\''s'). The empty word becomes ''.
std::string shell_quote(const std::string& word);

/// shell_quote each word and join with single spaces.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace hvd::launcher

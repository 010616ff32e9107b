#pragma once
/// POSIX-shell quoting and word splitting, shared by --dry-run output, the
/// mpirun command line, the remote agent command sent over SSH, --mpi-args /
/// --binding-args and the platforms' argument variables (OCI's HOROVOD_ARGS).
#include <string>
#include <vector>

namespace hvd::launcher {

/// Quotes one word for a POSIX shell: words made only of letters, digits and
/// `@%+=:,./-_^` stay as they are; anything else is wrapped in single quotes
/// ('it'\''s'). The empty word becomes ''.
std::string shell_quote(const std::string& word);

/// shell_quote each word and join with single spaces.
std::string shell_join(const std::vector<std::string>& words);

/// Splits `text` the way a POSIX shell splits words (single and double
/// quotes, backslash escapes; no expansion). `flag` names the text in
/// messages (--mpi-args, --binding-args, HOROVOD_ARGS). InvalidArgument on
/// an unterminated quote.
std::vector<std::string> split_shell_words(const std::string& text, const std::string& flag = "--mpi-args");

/// The argv that runs `command` with the user's shell, as OpenSSH runs a
/// ProxyCommand or a `Match exec`: {$SHELL (else /bin/sh), "-c", command}.
std::vector<std::string> user_shell_argv(const std::string& command);

}  // namespace hvd::launcher

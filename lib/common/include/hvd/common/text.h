#pragma once
/// How text that came from outside hvdrun is shown (docs/security.md,
/// "Security rules"): host names from -H, hostfiles, discovery scripts,
/// platform variables and JSON, pod IPs from the Kubernetes API. Printed
/// through these, no input can start or forge a line ("\n[0]<stdout>: ...")
/// or carry a terminal escape sequence, and none can flood the terminal.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvd {

/// `text` escaped and cut, for quoting an outside value in a message:
/// printable ASCII stays, a backslash becomes "\\", \n \r \t as such, every
/// other byte (C0 controls, DEL, anything >= 0x80: C1 controls, UTF-8) as
/// "\xNN"; beyond `max_bytes` of input the rest is cut as
/// "... (N bytes)", N the whole input's length. Backslashes are escaped so that "\n" in the output
/// always means a newline in the input.
std::string shown(std::string_view text, std::size_t max_bytes = 128);

/// A whole message made one safe line (for messages that may quote raw
/// outside text, applied where they are printed): like shown() but a
/// backslash stays as it is (a message may already hold shown() parts), and
/// the bound is larger.
std::string one_line(std::string_view message, std::size_t max_bytes = 4096);

/// The word of `candidates` closest to `word` for a "did you mean" hint
/// (a mistyped flag or config key): the smallest edit distance (insert,
/// delete, substitute, or swap two neighbours), when it is small for the
/// word's length (none for up to 2 letters, at most 1 up to 4, 2 up to 8, else 3); ties
/// go to the earlier candidate. Empty when none is close.
std::string closest_word(std::string_view word, const std::vector<std::string>& candidates);

/// Standard base64 (RFC 4648, with `=` padding) decoded; blanks and line
/// breaks are skipped. nullopt for anything else: a character outside the
/// alphabet, a length that is not a multiple of 4, padding in the middle.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace hvd

#pragma once
/// hvdrun's command line -> Options: the flags of the table in flags.h,
/// then --config-file and the environment for what the command line left
/// unset (command line > config file > environment > defaults).
#include <optional>
#include <string>

#include "hvd/launcher/options/options.h"

namespace hvd::launcher {

/// Result of parsing argv. Either `options` is set, or `exit_code` and
/// `message` say what to print (help/version to stdout, errors to stderr).
struct ParseOutcome {
  std::optional<Options> options;
  int exit_code = 0;
  std::string message;
  bool message_to_stdout = false;
};

/// Command line + --config-file + environment -> Options (cli.cpp). Flags
/// are read as horovodrun's argparse reads them: legacy single-dash names
/// and unambiguous abbreviations ("-n 4", "--num-p=4") are accepted; an
/// ambiguous abbreviation is a usage error naming its matches. argv[0]'s
/// base name is the program --help names (hvdrun or horovodrun). Usage
/// problems come back as one line "hvdrun: error: ..." with exit code 2; a
/// flag of a feature not built yet with 4. Never exits.
ParseOutcome parse_command_line(int argc, char** argv);

}  // namespace hvd::launcher

#pragma once
/// hvdrun's command line -> Options: the flags of the table in flags.h,
/// then --config-file and the environment for what the command line left
/// unset (command line > config file > environment > defaults).
#include <optional>
#include <string>
#include <vector>

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

/// hvdrun's own logging as the options ask (docs/cli.md#messages): quiet
/// on success as horovodrun is -- warnings and errors only -- unless
/// --verbose (debug), HVDRUN_LOG_LEVEL (the launcher only), or the job's
/// log level (--log-level, the config file's logging.level, else
/// HOROVOD_LOG_LEVEL) says otherwise, in that order; --log-hide-timestamp
/// (or HOROVOD_LOG_HIDE_TIME=1) drops the time prefix. A variable that is
/// not a level is named in one warning. parse_command_line calls it; a
/// mode that builds its Options otherwise calls it too.
void init_launcher_logging(const Options& options);

/// Flags a platform adds below the command line (docs/platforms.md#oci-data-science:
/// OCI's HOROVOD_ARGS and the flags made of its variables). Each layer is
/// written as command-line flags without a command; the command line wins
/// over every layer, an earlier layer over a later one, and every layer over
/// --config-file and the environment.
struct PlatformFlagLayer {
  std::string origin;  ///< how messages name the layer: "HOROVOD_ARGS"
  std::vector<std::string> args;
};
struct PlatformFlags {
  std::vector<PlatformFlagLayer> layers;
  /// The worker command when the command line has none (OCI__ENTRY_SCRIPT).
  std::vector<std::string> default_command;
};

/// parse_command_line with a platform's flags beneath the command line. A
/// layer that names a command, or a flag that is not hvdrun's, is a usage
/// error naming the layer's origin.
ParseOutcome parse_command_line(int argc, char** argv, const PlatformFlags& platform);

}  // namespace hvd::launcher

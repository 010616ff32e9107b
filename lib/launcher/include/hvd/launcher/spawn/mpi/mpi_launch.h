#pragma once
/// `hvdrun --mpi`: start the workers through an existing mpirun, as
/// horovodrun's mpi_run.py does (see docs/mpi.md).
///
/// hvdrun still owns the rendezvous store and the job's life: it runs the
/// store, starts mpirun as a child in its own process group, forwards
/// SIGINT/SIGTERM/SIGHUP to it and returns mpirun's exit status as its own.
///
/// Why only job-wide variables are exported: mpirun gives every rank the same
/// environment, so per-rank variables (HOROVOD_RANK, HOROVOD_LOCAL_RANK, ...)
/// cannot be set here. The worker library derives them from the MPI
/// launcher's own variables (OMPI_COMM_WORLD_RANK, PMI_RANK, ...; see
/// hvd/collective/mpi_env.h). Values never appear on the mpirun command line:
/// they are placed in mpirun's environment and exported by NAME (`-x NAME`,
/// `-genvlist A,B`), so neither `ps` nor --dry-run can show the job secret.
#include "hvd/common/io.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/job_plan.h"
#include "hvd/launcher/process/shell.h"  // split_shell_words, shell_quote

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace hvd::launcher {

enum class MpiImpl { OpenMpi, Mpich, IntelMpi, Unknown };

/// "Open MPI", "MPICH", "Intel MPI", "unknown".
const char* mpi_impl_name(MpiImpl impl);

/// What `mpirun --version` told us.
struct MpiInfo {
  MpiImpl impl = MpiImpl::Unknown;
  /// The program that is run ("mpirun", or a path).
  std::string mpirun = "mpirun";
  /// First non-empty line of the version output, for messages.
  std::string version_line;
};

/// Classifies `mpirun --version` output the way horovodrun does ("Open MPI"
/// or "OpenRTE" -> Open MPI; "Intel(R) MPI" -> Intel MPI; "MPICH" or
/// "HYDRA" -> MPICH). Pure. IBM Spectrum MPI reports as Unknown (unsupported).
MpiImpl detect_mpi_impl(const std::string& version_output);

/// The line that names the version, for messages: the first line of the
/// output, except for Hydra's "HYDRA build details:" header, where it is
/// "HYDRA <its Version: field>" ("HYDRA 4.0.2"). Pure.
std::string mpi_version_line(const std::string& version_output);

/// Runs `<mpirun> --version` (stdin /dev/null, output captured) and
/// classifies it. Throws hvd::InvalidArgument with one actionable line:
///  - "mpirun not found on PATH; install Open MPI or drop --mpi"
///  - "unsupported MPI implementation '<first line>' ..." (Unknown)
///  - "'mpirun --version' failed with status N: <first line>"
/// and hvd::TimeoutError when it does not finish before `deadline` (the probe
/// is killed and reaped).
MpiInfo probe_mpirun(const std::string& mpirun = "mpirun",
                     Deadline deadline = Deadline::after(std::chrono::seconds(10)));

/// probe_mpirun without the last check: an implementation hvdrun does not
/// support comes back as MpiImpl::Unknown instead of an error.
MpiInfo identify_mpirun(const std::string& mpirun = "mpirun",
                        Deadline deadline = Deadline::after(std::chrono::seconds(10)));

/// The job-wide variables an mpirun job exports to every rank, as
/// horovodrun exports its whole environment with -x: build_common_env (the
/// filtered launcher environment, HOROVOD_* tuning and controller variables,
/// -x exports) minus an enclosing MPI job's runtime variables (OMPI_*,
/// PMI_*, PMIX_*, HYDRA_*, PRTE_*) unless named with -x. Per-rank variables
/// are never included; the rendezvous variables are added by run_mpi_job
/// once the store listens.
std::map<std::string, std::string> mpi_job_env(const Options& options,
                                               const std::map<std::string, std::string>& launcher_env);

/// Variables for mpirun's own environment (not exported to the ranks):
/// for MPICH with -p or -i, HYDRA_LAUNCHER_EXTRA_ARGS="-p P -i KEY", the
/// words Hydra's ssh launcher adds (it has no -bootstrap-exec-args, which
/// is Intel MPI's), after the value hvdrun's own environment has (kept:
/// e.g. the Kubeflow MPI operator's). Throws InvalidArgument for an -i path
/// with a blank (Hydra splits the value at blanks). Empty otherwise.
std::map<std::string, std::string> mpirun_launcher_env(const MpiInfo& info, const Options& options);

/// One line per hvdrun option this MPI's mpirun cannot carry out, for a
/// warning: --prefix-output-with-timestamp and a second --network-interface
/// with Hydra (MPICH, Intel MPI); a --ssh-keepalive other than the default
/// with any (it paces hvdrun's own SSH connections). Pure.
std::vector<std::string> mpi_unapplied_options(const MpiInfo& info, const Options& options);

/// The directories --output-filename DIR needs on this machine before
/// mpirun starts: DIR for Open MPI (it makes the rest, but hangs when it
/// cannot make DIR); DIR/rank.0 .. DIR/rank.<np-1> for Hydra (MPICH, Intel
/// MPI), which writes every rank's output here, where mpirun runs, into
/// -outfile-pattern's files without making their directories. Pure.
std::vector<std::string> mpi_output_directories(const MpiInfo& info, const std::string& dir, std::size_t np);

/// The exact mpirun argv (argv[0] is info.mpirun). Pure.
///  Open MPI:  mpirun [--allow-run-as-root] --tag-output -np N -H h1:2,h2:2
///             <binding> -mca pml ob1 -mca btl ^openib
///             [-mca plm_rsh_no_tree_spawn true -mca plm_rsh_num_concurrent H (>= 64 hosts)]
///             [--timestamp-output] [-mca plm_rsh_args "-p P -i KEY -o StrictHostKeyChecking=yes"]
///             [-mca btl_tcp_if_include IF1,IF2] [--output-filename DIR]
///             -x NAME... <--mpi-args split shell-style> <command>
///  MPICH:     mpirun -l -np N -hosts h1:2,h2:2 <binding>
///             [-launcher ssh (-p/-i: mpirun_launcher_env)] [-iface IF]
///             [-outfile-pattern DIR/rank.%r/stdout -errfile-pattern DIR/rank.%r/stderr]
///             -genvlist A,B <mpi-args> <command>
///  Intel MPI: mpirun -l -np N -ppn S -hosts h1,h2 (every host needs the same
///             slot count, else InvalidArgument) [--binding-args words] [-bootstrap ssh
///             -bootstrap-exec-args "..."] [-iface IF] [-outfile-pattern ...]
///             -genvlist A,B <mpi-args> <command>
/// <binding> is `-bind-to none -map-by slot`, or the words of --binding-args
/// (split shell-style) in its place when given: horovodrun substitutes them
/// for Open MPI; hvdrun does so for MPICH too and adds them for Intel MPI
/// (which has no default binding) instead of dropping them.
/// `extra_env` names are exported (sorted); their values are never part of
/// the argv. Throws InvalidArgument for an Unknown impl, an empty command,
/// an unbalanced quote in --mpi-args or --binding-args, or uneven slots
/// with Intel MPI.
std::vector<std::string> build_mpirun_command(const MpiInfo& info, const Options& options, const JobPlan& plan,
                                              const std::map<std::string, std::string>& extra_env,
                                              bool running_as_root);

/// What --mpi-args asks of a job that mpirun does not start (hvdrun's own
/// spawning: --gloo, no usable mpirun, elastic mode). hvdrun honours the
/// output flags that guides copy from mpirun lines itself; the rest cannot
/// apply without mpirun.
struct MpiArgsWithoutMpirun {
  /// --display-map: print the placement before starting.
  bool display_map = false;
  /// --timestamp-output: as --prefix-output-with-timestamp.
  bool timestamp_output = false;
  /// --tag-output (MPICH: -l, -prepend-rank): hvdrun tags every line anyway.
  bool tag_output = false;
  /// --allow-run-as-root: hvdrun needs no permission to run as root.
  bool allow_run_as_root = false;
  /// Every other word, in the order given.
  std::vector<std::string> ignored;
};

/// Sorts --mpi-args words (split_shell_words) into the flags above (Open
/// MPI's one- and two-dash spellings) and the ignored rest. Pure.
MpiArgsWithoutMpirun interpret_mpi_args_without_mpirun(const std::vector<std::string>& words);

/// --dry-run for --mpi. Text: a comment naming the implementation, the exact
/// mpirun command as one shell-quoted line, then one comment line per
/// exported variable. Json: {"engine","mpi_implementation","mpirun_version",
/// "num_proc","command":[argv],"env":{...}}. Values of secret-like names
/// (is_secret_name) print as <hidden>; the rendezvous variables are
/// placeholders (they exist only once the store listens).
std::string render_mpi_dry_run(const MpiInfo& info, const Options& options, const JobPlan& plan,
                               const std::map<std::string, std::string>& extra_env, bool running_as_root,
                               DryRunFormat format = DryRunFormat::Text);

// The mpirun mode itself (probe, store, one mpirun under the Supervisor)
// is run_mpi_job in job/modes.h.

}  // namespace hvd::launcher

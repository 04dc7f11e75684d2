// `freight train --nproc N`: a data-parallel job on this machine for users who do not know
// mpirun. The process replaces itself with `mpirun -np N <this program> <the same arguments>`,
// with a binding that suits the host's cores, so each rank then runs the usual train command.
#pragma once
#include <string>
#include <vector>

namespace freight::cli {

// main() keeps its arguments here, for the relaunch.
void set_program_args(int argc, char** argv);

// The mpirun command for N ranks of this program with these arguments (without --nproc): for the
// message before the exec and for tests.
std::vector<std::string> mpirun_command(int nproc, const std::string& mpirun,
                                        const std::string& program,
                                        const std::vector<std::string>& args, int cores,
                                        bool as_root);
// The same on this host: its cores, and --allow-run-as-root when this process runs as root.
std::vector<std::string> mpirun_command(int nproc, const std::string& mpirun,
                                        const std::string& program,
                                        const std::vector<std::string>& args);
std::string this_program();  // the path of the running executable
// mpirun: FREIGHT_MPIRUN, else from PATH; an error naming `flag` when this Freight has no MPI or
// mpirun is not installed.
std::string find_mpirun(const std::string& flag);

// Under mpirun: checks that --nproc (when given) is the world's size and returns. Otherwise,
// for N > 1, prints the mpirun command and execs it (never returns); errors when mpirun cannot
// be found (FREIGHT_MPIRUN or PATH) or this Freight has no MPI.
void run_under_mpirun_if_asked(int nproc);

}  // namespace freight::cli

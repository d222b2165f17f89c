// conv3d-dx: the command-line front end. It translates arguments into a ProblemSpec and a Plan and reports
// errors; it computes nothing itself.
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "commands.hpp"
#include "npy.hpp"
#include "problem_args.hpp"

#ifndef CONV3D_DX_VERSION
#define CONV3D_DX_VERSION "unknown"
#endif

namespace {

const char* const kHelp = R"(usage: conv3d-dx <command> [flags]

The gradient of a 3-D convolution with respect to its input (Conv3DBackpropInputV2) on the CPU.

commands:
  run        compute y = dL/dx from out_backprop and filter .npy files, write y.npy
  validate   check a problem given by shapes; print it and the Ascend compatibility report
  demo       the built-in main job: a realistic problem on random data, timed and checked
  bench      time the operator on random data (one problem or --suite default), --json for scripts
  peak       measure this CPU's multiply-add peaks (fp32 FMA, vdpbf16ps, AMX), the rates shares of peak use

  conv3d-dx <command> --help   flags of a command
  conv3d-dx --version          the version

Exit status: 0 success, 2 invalid parameters (the message names the parameter), 1 other failures (I/O).
)";

int dispatch(const std::vector<std::string>& args) {
  using namespace conv3d_dx::cli;
  if (args.empty()) {
    std::cerr << kHelp;
    return 2;
  }
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kHelp;
    return 0;
  }
  if (command == "--version") {
    std::cout << "conv3d-dx " << CONV3D_DX_VERSION << "\n";
    return 0;
  }
  if (command == "run") return run_command(rest);
  if (command == "validate") return validate_command(rest);
  if (command == "demo") return demo_command(rest);
  if (command == "bench") return bench_command(rest);
  if (command == "peak") return peak_command(rest);
  throw CliError(2, "unknown command '" + command +
                        "' (expected run, validate, demo, bench or peak; see conv3d-dx --help)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace conv3d_dx;
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const cli::CliError& e) {
    std::cerr << "conv3d-dx: " << e.what() << "\n";
    return e.exit_code();
  } catch (const Error& e) {
    const cli::CliError c = cli::from_library_error(e);
    std::cerr << "conv3d-dx: " << c.what() << "\n";
    return c.exit_code();
  } catch (const npy::NpyError& e) {
    std::cerr << "conv3d-dx: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "conv3d-dx: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "conv3d-dx: " << e.what() << "\n";
    return 1;
  }
}

// libFuzzer harness: the command line of `conv3d-dx validate` — flag parsing, the attributes, validate() and
// the Ascend compatibility report — on arbitrary argument lists (the input split at newlines). Every outcome
// must be a report (exit status 0) or a CliError with exit status 2 (invalid parameters) and a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "conv3d_dx/conv3d_dx.hpp"
#include "problem_args.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace conv3d_dx;
  std::vector<std::string> argv;
  std::string token;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      argv.push_back(token);
      token.clear();
    } else {
      token += static_cast<char>(data[i]);
    }
  }
  if (!token.empty()) argv.push_back(token);

  std::ostringstream sink;  // the report, kept out of the fuzzer's output
  std::streambuf* out = std::cout.rdbuf(sink.rdbuf());
  try {
    const int status = cli::validate_command(argv);
    if (status != 0) std::abort();
  } catch (const cli::CliError& e) {
    if (e.exit_code() != 2 || std::string(e.what()).empty()) std::abort();
  } catch (const Error& e) {  // as main() reports it
    const cli::CliError c = cli::from_library_error(e);
    if (c.exit_code() != 2 || e.parameter().empty()) std::abort();
  }
  std::cout.rdbuf(out);
  return 0;
}

// The conv3d-dx subcommands. Each takes the arguments after its name, prints its results, and returns the
// exit status; errors are thrown as CliError or conv3d_dx::Error and reported by main.
#pragma once

#include <string>
#include <vector>

namespace conv3d_dx::cli {

int run_command(const std::vector<std::string>& args);
int validate_command(const std::vector<std::string>& args);
int demo_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int peak_command(const std::vector<std::string>& args);

}  // namespace conv3d_dx::cli

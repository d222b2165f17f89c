#include "args.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace conv3d_dx::cli {

CliError usage_error(const std::string& flag, const std::string& why) {
  return CliError(2, "invalid " + flag + ": " + why);
}

Args::Args(const std::vector<std::string>& argv, const std::vector<FlagSpec>& flags,
           const std::string& command) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string name = argv[i];
    std::optional<std::string> inline_value;
    if (name.rfind("--", 0) == 0) {
      if (const std::size_t eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name.resize(eq);
      }
    }
    const auto spec =
        std::find_if(flags.begin(), flags.end(), [&](const FlagSpec& f) { return f.name == name; });
    if (spec == flags.end()) {
      if (name.empty() || name[0] != '-') {
        throw CliError(2, "unexpected argument '" + argv[i] + "' for '" + command + "' (see conv3d-dx " +
                              command + " --help)");
      }
      throw CliError(
          2, "unknown flag " + name + " for '" + command + "' (see conv3d-dx " + command + " --help)");
    }
    if (values_.count(name)) throw usage_error(name, "given more than once");
    if (spec->value_name.empty()) {
      if (inline_value) throw usage_error(name, "takes no value, got '" + *inline_value + "'");
      values_[name] = "";
      continue;
    }
    if (inline_value) {
      values_[name] = *inline_value;
    } else if (i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0) {
      values_[name] = argv[++i];
    } else {
      throw usage_error(name, "missing value (expected " + name + " " + spec->value_name + ")");
    }
  }
}

std::optional<std::string> Args::get(const std::string& flag) const {
  const auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::required(const std::string& flag) const {
  const auto v = get(flag);
  if (!v) throw CliError(2, "missing required flag " + flag);
  return *v;
}

namespace {

std::int64_t parse_one(const std::string& flag, const std::string& whole, const std::string& item) {
  std::int64_t v = 0;
  const char* begin = item.data();
  const char* end = item.data() + item.size();
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  if (item.empty() || ec == std::errc::invalid_argument || ptr != end) {
    throw usage_error(flag, "'" + item + "' is not an integer (in '" + whole + "')");
  }
  if (ec == std::errc::result_out_of_range) {
    throw usage_error(flag, "'" + item + "' is out of the 64-bit integer range (in '" + whole + "')");
  }
  return v;
}

}  // namespace

std::vector<std::int64_t> parse_int_list(const std::string& flag, const std::string& text,
                                         const std::vector<std::size_t>& counts) {
  std::vector<std::int64_t> values;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    values.push_back(parse_one(flag, text, text.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (std::find(counts.begin(), counts.end(), values.size()) == counts.end()) {
    std::string expected;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (i) expected += i + 1 == counts.size() ? " or " : ", ";
      expected += std::to_string(counts[i]);
    }
    throw usage_error(flag, "expected " + expected + " comma-separated integers, got " +
                                std::to_string(values.size()) + " ('" + text + "')");
  }
  return values;
}

std::int64_t parse_int(const std::string& flag, const std::string& text, std::int64_t min, std::int64_t max) {
  const std::int64_t v = parse_one(flag, text, text);
  if (v < min || v > max) {
    throw usage_error(
        flag, std::to_string(v) + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

std::string format_flags(const std::vector<FlagSpec>& flags) {
  std::size_t width = 0;
  for (const FlagSpec& f : flags) width = std::max(width, f.name.size() + 1 + f.value_name.size());
  std::string out;
  for (const FlagSpec& f : flags) {
    std::string left = f.name + (f.value_name.empty() ? "" : " " + f.value_name);
    left.resize(width, ' ');
    out += "  " + left + "  " + f.help + "\n";
  }
  return out;
}

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace conv3d_dx::cli

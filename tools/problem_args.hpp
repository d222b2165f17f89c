// The operator attributes as command-line flags, shared by run, validate and bench, and their translation
// into a conv3d_dx::ProblemSpec.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::cli {

using Shape5 = std::array<std::int64_t, 5>;

// --input-size, --strides, --pads, --dilations, --groups, --data-format, --filter-format, --dtype,
// --output-dtype, --hf32, --saturate, --threads, --isa, --verbose, --max-memory.
std::vector<FlagSpec> attribute_flags();

struct ParsedAttributes {
  Attributes attrs;  // input_size keeps the 4 or 5 values given
  Layout filter_format = Layout::NCDHW;
  std::optional<DType> dtype;         // --dtype
  std::optional<DType> output_dtype;  // --output-dtype
  OverflowMode overflow = OverflowMode::ieee;
  Options options;
  bool two_d() const { return attrs.input_size.size() == 4; }
};

// How many values a shape or attribute list may have: 5, or also 4 for a 2-D problem (D = 1 inserted).
std::vector<std::size_t> value_counts(bool two_d);

// Parses the attribute flags. --input-size, --strides and --pads are required unless `geometry_optional`
// (bench --suite and demo supply their own).
ParsedAttributes parse_attributes(const Args& args, bool geometry_optional = false);

// Turns a 4-D or 5-D shape in `layout` order into 5-D by inserting D = 1 where the layout keeps D
// (expand_to_5d).
// A 4-D shape is accepted only for a 2-D problem; `flag` names the source in errors.
Shape5 to_5d(const std::vector<std::int64_t>& shape, Layout layout, bool two_d, const std::string& flag);

// A required shape flag (--out-backprop-shape, --filter-shape) in `layout` order, as 5-D.
Shape5 parse_shape(const Args& args, const std::string& flag, Layout layout, bool two_d);

// The spec for contiguous tensors of the given shapes (in data-format / filter-format order) and dtype;
// y is contiguous with the shape of input_size. Data pointers are left null.
ProblemSpec make_spec(const ParsedAttributes& pa, const Shape5& dy_shape, const Shape5& filter_shape,
                      DType dtype);

// The y shape to write: input_size as given (4 values stay 4-D).
std::vector<std::int64_t> y_file_shape(const ParsedAttributes& pa);

// Maps a library error to the CLI's: "invalid <parameter>: <message>", exit 2 for invalid parameters,
// 1 for resource and internal failures.
CliError from_library_error(const Error& e);

// A byte count: digits with an optional K, M, G or T suffix (powers of 1024); a CliError names the flag.
std::int64_t parse_bytes(const std::string& flag, const std::string& text);

// The element count of a contiguous 5-D shape.
std::int64_t element_count(const Shape5& shape);

}  // namespace conv3d_dx::cli

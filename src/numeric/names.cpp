// Names of the public enums, element sizes, and parsing of the spellings front ends accept.
#include <algorithm>
#include <cctype>
#include <string>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx {
namespace {

std::string lower(const std::string& s) {
  std::string out = s;
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

[[noreturn]] void reject(const char* parameter, const std::string& value, const char* accepted) {
  throw Error(ErrorCode::invalid_argument, parameter,
              std::string(parameter) + " '" + value + "' is not recognised; expected one of " + accepted);
}

}  // namespace

const char* to_string(DType d) {
  switch (d) {
    case DType::f32:
      return "fp32";
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    case DType::hif8:
      return "hif8";
    case DType::fp8_e4m3fn:
      return "fp8_e4m3fn";
  }
  return "unknown";
}

const char* to_string(Layout l) {
  switch (l) {
    case Layout::NCDHW:
      return "NCDHW";
    case Layout::NDHWC:
      return "NDHWC";
    case Layout::DHWCN:
      return "DHWCN";
  }
  return "unknown";
}

const char* to_string(OverflowMode mode) {
  switch (mode) {
    case OverflowMode::ieee:
      return "ieee";
    case OverflowMode::saturate:
      return "saturate";
  }
  return "unknown";
}

const char* to_string(InputRounding rounding) {
  switch (rounding) {
    case InputRounding::none:
      return "none";
    case InputRounding::hf32:
      return "hf32";
    case InputRounding::fp16:
      return "fp16";
  }
  return "unknown";
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::best:
      return "best";
    case Isa::amx_bf16:
      return "amx_bf16";
    case Isa::avx512_bf16:
      return "avx512_bf16";
    case Isa::avx512:
      return "avx512";
    case Isa::avx2:
      return "avx2";
    case Isa::portable:
      return "portable";
    case Isa::reference:
      return "reference";
  }
  return "unknown";
}

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::hif8:
    case DType::fp8_e4m3fn:
      return 1;
  }
  throw Error(ErrorCode::invalid_argument, "dtype",
              "unknown dtype value " + std::to_string(static_cast<int>(d)));
}

DType parse_dtype(const std::string& s) {
  const std::string v = lower(s);
  if (v == "fp32" || v == "float32") return DType::f32;
  if (v == "fp16" || v == "float16") return DType::f16;
  if (v == "bf16" || v == "bfloat16") return DType::bf16;
  if (v == "hif8" || v == "hifloat8") return DType::hif8;
  if (v == "fp8_e4m3fn" || v == "float8_e4m3fn") return DType::fp8_e4m3fn;
  reject("dtype", s,
         "fp32 (float32), fp16 (float16), bf16 (bfloat16), hif8 (hifloat8), fp8_e4m3fn (float8_e4m3fn)");
}

Layout parse_layout(const std::string& s) {
  const std::string v = lower(s);
  if (v == "ncdhw") return Layout::NCDHW;
  if (v == "ndhwc") return Layout::NDHWC;
  if (v == "dhwcn") return Layout::DHWCN;
  reject("layout", s, "NCDHW, NDHWC, DHWCN");
}

Isa parse_isa(const std::string& s) {
  const std::string v = lower(s);
  for (Isa isa :
       {Isa::best, Isa::amx_bf16, Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::portable, Isa::reference}) {
    if (v == to_string(isa)) return isa;
  }
  reject("isa", s, "best, amx_bf16, avx512_bf16, avx512, avx2, portable, reference");
}

}  // namespace conv3d_dx

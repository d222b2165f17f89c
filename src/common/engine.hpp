// The interface every engine implements behind Plan. An engine is created for one Problem; its factory
// returns nullptr and says why when it declines the problem, so verbose mode can report it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/cpu_model.hpp"
#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx {

class EngineImpl {
 public:
  virtual ~EngineImpl() = default;
  virtual std::string name() const = 0;
  // The engine's choices for this problem (blocking, layouts), for --verbose; empty when it has none.
  virtual std::string config() const { return {}; }
  // Bytes of scratch execute() needs; the caller passes at least this much (or Plan allocates it).
  virtual std::size_t workspace_bytes() const { return 0; }
  // Read the filter (laid out as problem.filter_strides say) into the engine's own form.
  virtual void pack_filter(const void* filter) = 0;
  // Compute y from dy with the last packed filter. Must not throw once started; y is fully written. Changes
  // nothing in the engine, so concurrent calls with separate workspaces are safe.
  virtual void execute(const void* dy, void* y, void* workspace) const = 0;
  // pack_filter then execute, bitwise the same; an engine may overlap the two (each thread packing the part
  // of the filter it is about to use while it is hot in cache). With `keep` the filter stays packed
  // afterwards; without, an engine may read it in place and pack nothing (Options::keep_filter).
  virtual void execute_with_filter(const void* dy, const void* filter, void* y, void* workspace,
                                   bool /*keep*/) {
    pack_filter(filter);
    execute(dy, y, workspace);
  }
};

// What an engine allocates, estimated before it allocates anything: its packed filter, packed-block buffers
// and tables, the workspace execute() uses, and each thread's scratch. Sums saturate rather than overflow.
struct EngineMemory {
  std::int64_t packed = 0, workspace = 0, per_thread = 0;
  std::int64_t total(int threads) const;
  // "N bytes (packed filter, blocks and tables P, workspace W, ...)"
  std::string describe(int threads) const;
};

// An engine that would need more memory than the request allows, or whose allocation failed.
class OutOfMemory : public Error {
 public:
  OutOfMemory(std::string parameter, const std::string& message, std::int64_t needed)
      : Error(ErrorCode::out_of_memory, std::move(parameter), message), needed_(needed) {}
  std::int64_t needed() const noexcept { return needed_; }

 private:
  std::int64_t needed_;
};

struct EngineRequest {
  const Problem& problem;
  int threads;  // resolved, >= 1
  Isa isa;      // resolved: never Isa::best
  CpuModel cpu = host_cpu_model();
  // The caller named the ISA (Options::isa or CONV3D_DX_ISA): its own kernels run even where the cost
  // table prefers others (bf16 through vdpbf16ps on a CPU where widening to fp32 is faster).
  bool isa_named = false;
  std::int64_t max_memory_bytes = 0;  // Options::max_memory_bytes
  // Options::keep_filter: what the plan's calls will mostly need allocated (a packed filter, or buffers to
  // stream it through); an engine can still do the other when asked.
  bool keep_filter = true;
};

// Throws OutOfMemory naming max_memory when `memory` is above the request's limit. Engines call it before
// their first large allocation.
void check_memory(const EngineRequest&, const std::string& engine, const EngineMemory&);

struct EngineFactory {
  const char* name;
  // Returns nullptr and fills why_not when the engine declines.
  std::unique_ptr<EngineImpl> (*create)(const EngineRequest&, std::string& why_not);
};

// The CPU engines in order of preference (src/cpu); Plan takes the first that accepts.
const std::vector<EngineFactory>& cpu_engines();
// The oracle as an engine (src/reference): used when Options::isa is Isa::reference.
std::unique_ptr<EngineImpl> make_reference_engine(const Problem&);

// The best ISA this CPU supports, and whether it supports a given one.
Isa detect_isa();
bool cpu_supports(Isa);
// Whether the CPU has AVX512_VBMI's byte permutes (Ice Lake and Zen 4 on): the AVX-512 8-bit encoders use
// them.
bool cpu_has_avx512_vbmi();
// Empty when this process may use AMX tiles, else why not (CPU, OS or Linux permission).
const std::string& amx_unavailable();

}  // namespace conv3d_dx

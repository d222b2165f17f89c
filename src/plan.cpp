// Plan: resolve threads and ISA, pick the first engine that accepts the problem, own its scratch memory.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <new>
#include <optional>
#include <shared_mutex>
#include <thread>

#include "common/engine.hpp"
#include "common/output_pages.hpp"
#include "common/parallel.hpp"
#include "problem/checked.hpp"
#include "problem/overlap.hpp"

namespace conv3d_dx {
namespace {

// Options::threads: 0 means one per hardware thread; more than 4 per hardware thread is refused.
int resolve_threads(int requested) {
  const unsigned hw = std::thread::hardware_concurrency();
  const int hardware = hw > 0 ? static_cast<int>(std::min(hw, 1u << 20)) : 1;
  const int most = 4 * hardware;
  if (requested < 0 || requested > most)
    throw Error(ErrorCode::invalid_argument, "threads",
                "threads is " + std::to_string(requested) + " but must be in [0, " + std::to_string(most) +
                    "] (0: one per hardware thread; at most 4 x the " + std::to_string(hardware) +
                    " hardware threads)");
  return requested > 0 ? requested : hardware;
}

// Options::isa, else the CONV3D_DX_ISA environment variable, else the best the CPU has. `named` tells
// whether the caller named one.
Isa resolve_isa(Isa requested, bool& named) {
  std::string source = "isa";
  named = false;
  if (requested == Isa::best) {
    const char* env = std::getenv("CONV3D_DX_ISA");
    if (env == nullptr || *env == '\0') return detect_isa();
    source = "CONV3D_DX_ISA";
    try {
      requested = parse_isa(env);
    } catch (const Error& e) {
      throw Error(ErrorCode::invalid_argument, source, "CONV3D_DX_ISA: " + std::string(e.what()));
    }
    if (requested == Isa::best) return detect_isa();
  }
  if (!cpu_supports(requested))
    throw Error(ErrorCode::unsupported, source,
                source + " " + to_string(requested) +
                    " is not supported by this CPU (best: " + to_string(detect_isa()) + ")");
  named = true;
  return requested;
}

void require(const void* pointer, const char* name) {
  if (pointer == nullptr)
    throw Error(ErrorCode::null_pointer, name, std::string(name) + " is a null pointer");
}

}  // namespace

std::int64_t EngineMemory::total(int threads) const {
  return saturating_add(saturating_add(packed, workspace), saturating_mul(per_thread, threads));
}

std::string EngineMemory::describe(int threads) const {
  return std::to_string(total(threads)) + " bytes (packed filter, blocks and tables " +
         std::to_string(packed) + ", workspace " + std::to_string(workspace) + ", " +
         std::to_string(threads) + " threads x " + std::to_string(per_thread) + " scratch)";
}

void check_memory(const EngineRequest& request, const std::string& engine, const EngineMemory& memory) {
  const std::int64_t needed = memory.total(request.threads);
  if (request.max_memory_bytes > 0 && needed > request.max_memory_bytes)
    throw OutOfMemory("max_memory",
                      "out of memory: " + engine + " needs " + memory.describe(request.threads) +
                          " but max_memory is " + std::to_string(request.max_memory_bytes),
                      needed);
}

struct Plan::State {
  void create_engine();
  // Runs run(workspace) with the caller's workspace, else the plan's own (allocated on first need), else,
  // while another call is using that one, a workspace of this call's own.
  template <class Run>
  void with_workspace(void* given, Run&& run);

  Problem problem;
  int threads = 1;
  Isa isa = Isa::portable;
  bool isa_named = false;  // by the caller, rather than detected
  std::int64_t max_memory_bytes = 0;
  bool keep_filter = true;  // Options::keep_filter
  std::unique_ptr<EngineImpl> engine;
  std::vector<std::string> declined;
  // Calls that only read the packed filter (execute_packed) share this lock; calls that pack take it alone.
  std::shared_mutex filter_mutex;
  bool filter_packed = false;
  std::mutex workspace_mutex;  // held while a call uses `workspace`
  std::vector<unsigned char> workspace;
};

void Plan::State::create_engine() {
  if (isa == Isa::reference) {
    engine = make_reference_engine(problem);
    return;
  }
  EngineRequest request{problem, threads, isa};
  request.isa_named = isa_named;
  request.max_memory_bytes = max_memory_bytes;
  request.keep_filter = keep_filter;
  // An engine out of memory (above the limit, or refused by the allocator) declines: a leaner one may fit.
  // When none fits, the error is the leanest engine's.
  std::optional<OutOfMemory> leanest;
  const auto note = [&](const OutOfMemory& e) {
    if (!leanest || e.needed() < leanest->needed()) leanest = e;
  };
  for (const EngineFactory& factory : cpu_engines()) {
    std::string why_not;
    try {
      engine = factory.create(request, why_not);
    } catch (const OutOfMemory& e) {
      note(e);
      why_not = e.what();
    } catch (const std::bad_alloc&) {
      note(OutOfMemory("", std::string("out of memory: ") + factory.name + "'s tables could not be allocated",
                       INT64_MAX));
      why_not = "out of memory for its tables";
    }
    if (engine) return;
    declined.push_back(std::string(factory.name) + ": " + why_not);
  }
  if (leanest) throw *leanest;
  throw Error(ErrorCode::internal, "", "no engine accepts the problem " + problem.describe());
}

Plan::Plan(const Problem& problem, const Options& options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.problem = validate(problem);
  const int requested = resolve_threads(options.threads);
  // Start the workers now, on the planning thread; with fewer than asked for, the plan runs with those.
  s.threads = reserve_threads(requested);
  s.isa = resolve_isa(options.isa, s.isa_named);
  if (options.max_memory_bytes < 0)
    throw Error(
        ErrorCode::invalid_argument, "max_memory",
        "max_memory is " + std::to_string(options.max_memory_bytes) + " but must be >= 0 (0: no limit)");
  s.max_memory_bytes = options.max_memory_bytes;
  s.keep_filter = options.keep_filter;
  try {
    s.create_engine();
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, "", "out of memory while planning " + problem.describe());
  }
  if (options.verbose) {
    std::cerr << "conv3d-dx: cpu " << host_cpu_model().describe() << '\n';
    if (s.threads < requested)
      std::cerr << "conv3d-dx: only " << s.threads << " of " << requested
                << " threads could be started; running with " << s.threads << '\n';
    for (const auto& d : s.declined) std::cerr << "conv3d-dx: declined " << d << '\n';
    std::cerr << "conv3d-dx: engine " << s.engine->name() << " (isa " << to_string(s.isa) << ", " << s.threads
              << " threads) for " << problem.describe() << '\n';
    if (const std::string config = s.engine->config(); !config.empty())
      std::cerr << "conv3d-dx: config " << config << '\n';
  }
}

Plan::~Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;

const Problem& Plan::problem() const { return state_->problem; }
std::string Plan::engine_name() const { return state_->engine->name(); }
const std::vector<std::string>& Plan::declined() const { return state_->declined; }
std::size_t Plan::workspace_bytes() const { return state_->engine->workspace_bytes(); }
int Plan::threads() const { return state_->threads; }
Isa Plan::isa() const { return state_->isa; }

void Plan::pack_filter(const void* filter) {
  require(filter, "filter");
  State& s = *state_;
  std::unique_lock lock(s.filter_mutex);
  s.filter_packed = false;  // until the engine has packed all of it
  s.engine->pack_filter(filter);
  s.filter_packed = true;
}

template <class Run>
void Plan::State::with_workspace(void* given, Run&& run) {
  const std::size_t bytes = engine->workspace_bytes();
  if (given != nullptr || bytes == 0) return run(given);
  const auto allocate = [bytes](std::vector<unsigned char>& buffer) {
    if (buffer.size() >= bytes) return;
    try {
      buffer.resize(bytes);
    } catch (const std::bad_alloc&) {
      throw Error(ErrorCode::out_of_memory, "workspace",
                  "out of memory: needs " + std::to_string(bytes) + " bytes for the workspace");
    }
  };
  if (std::unique_lock lock(workspace_mutex, std::try_to_lock); lock.owns_lock()) {
    allocate(workspace);
    return run(workspace.data());
  }
  std::vector<unsigned char> own;
  allocate(own);
  run(own.data());
}

void Plan::execute_packed(const void* out_backprop, void* y, void* workspace) {
  State& s = *state_;
  std::shared_lock lock(s.filter_mutex);
  if (!s.filter_packed)
    throw Error(ErrorCode::invalid_argument, "filter", "filter has not been packed: call pack_filter first");
  if (s.problem.y_elements() == 0) return;  // N == 0: an empty y, nothing to read or write
  require(out_backprop, "out_backprop");
  require(y, "y");
  // The packed filter is the engine's own copy.
  map_in_y(s.problem, require_y_disjoint(s.problem, out_backprop, nullptr, y), s.threads);
  s.with_workspace(workspace, [&](void* ws) { s.engine->execute(out_backprop, y, ws); });
}

void Plan::execute(const void* out_backprop, const void* filter, void* y, void* workspace) {
  State& s = *state_;
  if (s.problem.y_elements() == 0) {  // nothing to compute; the filter is packed only if it is to be kept
    if (s.keep_filter) return pack_filter(filter);
    require(filter, "filter");
    std::unique_lock lock(s.filter_mutex);
    s.filter_packed = false;
    return;
  }
  require(filter, "filter");
  require(out_backprop, "out_backprop");
  require(y, "y");
  map_in_y(s.problem, require_y_disjoint(s.problem, out_backprop, filter, y), s.threads);
  std::unique_lock lock(s.filter_mutex);
  s.with_workspace(workspace, [&](void* ws) {
    s.filter_packed = false;  // until the engine has packed all of it
    s.engine->execute_with_filter(out_backprop, filter, y, ws, s.keep_filter);
    s.filter_packed = s.keep_filter;
  });
}

void conv3d_backprop_input(const ProblemSpec& spec, const Options& options) {
  const Problem problem = validate(spec);
  if (problem.y_elements() == 0) return;
  require(spec.out_backprop.data, "out_backprop");
  require(spec.filter.data, "filter");
  require(spec.y.data, "y");
  Options once = options;
  once.keep_filter = false;  // the plan ends with the call
  Plan plan(problem, once);
  plan.execute(spec.out_backprop.data, spec.filter.data, spec.y.data);
}

}  // namespace conv3d_dx

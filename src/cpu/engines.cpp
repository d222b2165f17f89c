#include "common/engine.hpp"
#include "cpu/direct.hpp"

namespace conv3d_dx {

const std::vector<EngineFactory>& cpu_engines() {
  static const std::vector<EngineFactory> engines = {
      {"direct", &make_direct_engine},
  };
  return engines;
}

}  // namespace conv3d_dx

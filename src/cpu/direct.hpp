#pragma once

#include "common/engine.hpp"

namespace conv3d_dx {

// Direct gather loops with fp32 accumulation over any strides, dtypes and layouts; never declines.
std::unique_ptr<EngineImpl> make_direct_engine(const EngineRequest&, std::string& why_not);

}  // namespace conv3d_dx

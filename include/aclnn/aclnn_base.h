/* conv3d-dx: what every aclnnop header includes (docs/aclnn.md). C and C++. */
#ifndef CONV3D_DX_ACLNN_ACLNN_BASE_H
#define CONV3D_DX_ACLNN_ACLNN_BASE_H

#include "acl/acl_base.h"
#include "aclnn/acl_meta.h"

#endif /* CONV3D_DX_ACLNN_ACLNN_BASE_H */

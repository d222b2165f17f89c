/* conv3d-dx: the CANN-compatible entry header: programs include "acl/acl.h" (docs/aclnn.md). C and C++. */
#ifndef CONV3D_DX_ACL_ACL_H
#define CONV3D_DX_ACL_ACL_H

#include "acl/acl_base.h"
#include "acl/acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* configPath may be null or "" (no configuration); otherwise the file must exist (its content is ignored).
 * A second aclInit without aclFinalize returns ACL_ERROR_REPEAT_INITIALIZE. */
ACL_FUNC_VISIBILITY aclError aclInit(const char* configPath);
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif

#endif /* CONV3D_DX_ACL_ACL_H */

// Layering probe: cuda/ must not see autograd/ or the ops' Var-level headers. Must NOT compile.
#include "nn/ops/rmsnorm.h"

// Layering probe: tensor/ must not see autograd/. Must NOT compile.
#include "autograd/var.h"

// Layering probe: data/ must not see nn/. Must NOT compile.
#include "nn/model.h"

// Layering probe: eval/ must not see train/. Must NOT compile.
#include "train/checkpoint.h"

// Layering probe: nn/ must not see train/ (ARCHITECTURE section 11). Must NOT compile.
#include "train/optim.h"

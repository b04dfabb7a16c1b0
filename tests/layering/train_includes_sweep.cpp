// Layering probe: train/ must not see sweep/ (the sweep drives train, not the other way). Must NOT compile.
#include "sweep/grid.h"

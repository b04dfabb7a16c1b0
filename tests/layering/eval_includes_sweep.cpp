// Layering probe: eval/ must not see sweep/. Must NOT compile.
#include "sweep/report.h"

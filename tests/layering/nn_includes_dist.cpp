// Layering probe: nn/ must not see dist/ (models know nothing of ranks). Must NOT compile.
#include "dist/communicator.h"

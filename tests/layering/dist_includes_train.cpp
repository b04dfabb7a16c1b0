// Layering probe: dist/ must not see train/ (the trainer drives data parallelism, not the other way). Must NOT compile.
#include "train/trainer.h"

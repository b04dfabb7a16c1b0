// Layering probe, the control: train/ sees nn/ and data/. MUST compile.
#include "data/loader.h"
#include "nn/model.h"

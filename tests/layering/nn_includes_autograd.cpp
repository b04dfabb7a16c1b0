// Layering probe, the control: nn/ sees autograd/ and tensor/. MUST compile.
#include "autograd/var.h"
#include "nn/model.h"

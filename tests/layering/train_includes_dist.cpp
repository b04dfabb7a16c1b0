// Layering control: train/ sees dist/ (the trainer reduces gradients through it). Must compile.
#include "dist/grad_buckets.h"

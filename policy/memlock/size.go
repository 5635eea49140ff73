package memlock

import "github.com/rdmad/rdmad/internal/size"

// Size is the amount of memory a limit allows; see package size.
type Size = size.Size

// Unlimited is RLIM_INFINITY: no limit.
const Unlimited = size.Unlimited

// The control: a file on the dist floor that includes headers of its own floor and of every floor
// below it compiles, so the two probes beside it fail for their include alone.
#include "args.h"
#include "data.h"
#include "device.h"
#include "dist.h"
#include "mlp.h"
#include "ops.h"

int floor_probe_down(void) { return (int)sizeof(ProcessGroup) + (int)sizeof(Mlp) + (int)sizeof(Ctx); }

// A file on the nn floor that includes the ops floor's internal header: must not compile.
#include "ops_backend.h"

int floor_probe_private(void) { return 0; }

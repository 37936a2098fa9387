// A file on the base floor that includes the dist floor's header: must not compile (common/CMakeLists.txt).
#include "dist.h"

int floor_probe_up(void) { return (int)sizeof(ProcessGroup); }

// hvdrun: everything is in the launcher library (lib/launcher/src/job/hvdrun_main.cpp).
#include "hvd/launcher/job/hvdrun_main.h"

int main(int argc, char** argv) { return hvd::launcher::hvdrun_main(argc, argv); }

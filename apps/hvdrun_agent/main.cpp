// hvdrun-agent: one per host and launch; hvdrun starts it (spawn/agent.h).
#include "hvd/launcher/spawn/agent.h"

int main(int argc, char** argv) { return hvd::launcher::agent_main(argc, argv); }

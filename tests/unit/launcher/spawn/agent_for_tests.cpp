// The agent alone, so local-spawner tests need no complete hvdrun binary.
#include "hvd/launcher/spawn/agent.h"

int main(int argc, char** argv) { return hvd::launcher::agent_main(argc, argv); }

// The agent alone, so local-spawner tests need no complete hvdrun binary.
#include "hvd/launcher/agent.h"

int main(int argc, char** argv) { return hvd::launcher::agent_main(argc, argv); }

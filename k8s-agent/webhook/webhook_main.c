/* coll-webhook: test driver that runs the webhook mode without the rest of coll-agent. */
#include "webhook.h"

int main(int argc, char **argv)
{
    return agent_webhook_main(argc, argv);
}

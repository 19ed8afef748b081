/* Text that becomes a JSON string: the webhook's replies and annotations, the agent's Events and
 * Communicator conditions. */
#ifndef AGENT_TEXT_H
#define AGENT_TEXT_H

/* s made valid UTF-8 in place, as a JSON string must be (json_string and json_pack refuse it
 * otherwise: a reply, an Event or a condition that is then not sent). jansson's error text
 * quotes the input's bytes up to where it stopped, often inside a character, and snprintf may
 * cut a message inside a character. Each byte that does not begin a whole, valid sequence
 * becomes '?'. */
void agent_utf8_clean(char *s);

#endif

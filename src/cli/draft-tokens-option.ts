/** `--draft-tokens N`, shared by the commands that generate text. */
import { DEFAULT_DRAFT_TOKENS } from "../scheduler/defaults.js";
import { option } from "./options.js";

export const draftTokensOption = option.integer({
  min: 0,
  max: 16,
  default: DEFAULT_DRAFT_TOKENS,
  description:
    "prompt-lookup drafts, per text model: when one sequence decodes alone, its next tokens are guessed from where its last 3-4 tokens occurred before (in its prompt or answer) and up to this many checked in one model call; answers that quote their prompt (code edits, extraction) come about three times as fast. 0, the default, turns drafts off: a check rounds activations as a prompt does, so greedy answers may part from undrafted ones where two tokens nearly tie",
});

/**
 * The held-out text of the quality probe: written for kiln (so no model was trained on it), fixed
 * (so nights compare), and varied (narrative, instructions, numbers, a little code, dialogue).
 * Changing it changes every quality figure: the probe records its hash with each measurement.
 */
import { createHash } from "node:crypto";

export const PROBE_TEXT = `The lighthouse on Carrick Point was switched to automatic operation in the spring, but Maren kept
climbing its ninety-one steps every evening anyway. She told the harbour office it was to check the
lens for salt, which was partly true. Mostly she liked the moment when the lamp woke up and swept its
first long arm of light across the water, as if it were counting the fishing boats home.

Her notebook from that year survives. On the first page she wrote a recipe for barley soup: soak one
cup of barley overnight, soften two onions and a leek in butter, add the barley with six cups of
stock, and simmer for forty minutes before stirring in a handful of chopped parsley. Underneath, in a
different ink, she added that the soup tastes better on the second day and that nobody believes this
until they try it.

The later pages are mostly weather. "Wind north-west, force five, falling. Pressure 1012 and rising.
Three trawlers in before dark; the Saint Brendan was late again." Every tenth day she recorded the tide
tables against what she actually saw, and the differences grew through the autumn, sometimes by more
than twenty minutes. She sent her figures to the coastguard, who thanked her politely and changed
nothing.

In November a student named Tomas came to measure the old foghorn for a project on acoustic history.
He brought a laptop and a small script to log the sound levels:

    for reading in sensor.stream(interval=0.5):
        if reading.decibels > threshold:
            log.append((reading.time, reading.decibels))

"Why half a second?" Maren asked. "Because the horn's pattern repeats every thirty seconds," he said,
"and I wanted sixty readings per cycle." She thought about that for a while and then asked whether he
had considered the echo from the cliffs, which arrives about a second and a half later on calm days.
He had not. They spent the rest of the afternoon on the gallery, him adjusting the script and her
timing the echoes with a kitchen stopwatch, and the numbers they wrote down agreed to within a tenth
of a second.

When the report was finished it thanked "the keeper of Carrick Point, without whose patience the
second chapter would be wrong." Maren pinned it to the wall beside the tide tables. The lamp went on
turning every night, eleven seconds to a revolution, and she went on climbing the stairs to watch it.`;

/** Short hash of the probe text, recorded with each quality figure. */
export const PROBE_TEXT_SHA256 = createHash("sha256").update(PROBE_TEXT).digest("hex").slice(0, 16);

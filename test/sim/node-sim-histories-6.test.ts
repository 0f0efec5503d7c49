// Slice 6 of the node simulator's seeded histories in `npm test` (test/sim/history-slice.ts).
import { historySlice } from "./history-slice.ts";

historySlice(6);

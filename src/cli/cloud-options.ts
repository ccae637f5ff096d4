/** The options `kiln serve --cloud`, `kiln keys` and `kiln usage` share: where cloud mode's database and key secret are. */
import { openCloudStore, type CloudStore } from "../cloud/index.js";
import { option } from "./options.js";

export const databaseOption = option.string({
  value: "<url|path>",
  description: "cloud mode's database: postgres://… (shared by every replica of a fleet) or an SQLite file; default $KILN_HOME/kiln.sqlite",
});

export const keySecretFileOption = option.string({
  value: "<path>",
  description: "file holding the secret API keys are hashed with (env KILN_KEY_SECRET wins); default $KILN_HOME/key-secret, created at first use",
});

/** Runs `work` with the store `--database` names, closing it after. */
export async function withCloudStore<T>(database: string | undefined, work: (store: CloudStore) => Promise<T>): Promise<T> {
  const store = await openCloudStore(database);
  try {
    return await work(store);
  } finally {
    await store.close();
  }
}

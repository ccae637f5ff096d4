/** The catalogue package: models, lookups, records database and the model store. */
export { MODELS } from "./models.js";
export { describeSource, embeddedModels, getModel, hasModel, listModels, memberPath, packageMembers, SLUG_PATTERN, UnknownModelError } from "./catalogue.js";
export { applySchema, openDatabase, readModels, schemaPath, seedModels, type KilnDatabase } from "./db.js";
export { artifactsDir, databasePath, kilnHome, modelDir } from "./paths.js";
export { currentPromotion, promoteArtifact, promotionHistory, rollbackPromotion, type PromoteInput, type Promotion } from "./promotions.js";
export {
  DEFAULT_MAX_STORED_RESPONSES,
  DEFAULT_STORED_RESPONSE_DAYS,
  SqliteResponseStore,
  type ResponseRetention,
  type ResponseStore,
  type StoredItem,
  type StoredResponse,
} from "./stored-responses.js";
export {
  ChecksumError,
  HttpStatusError,
  pullModel,
  PullError,
  SizeError,
  type PulledFile,
  type PulledModel,
  type PullOptions,
  type PullProgress,
} from "./pull/index.js";
export { hubEndpoint } from "./pull/hub.js";
export type * from "./types.js";

/**
 * The Lua scripts of the Redis limit store: each admit and each settle is one script, so it runs as
 * one atomic step for every replica sharing the Redis. The arithmetic repeats `window.ts`.
 *
 * Data per API key (prefix `P`, default `kiln:limits:`):
 *   P req:<key>    sorted set, member ticket, score admission time (ms): the request window
 *   P tok:<key>    sorted set, member `<ticket>:<tokens>`, score admission time: the token window
 *   P conc:<key>   sorted set, member ticket, score lease end (ms): concurrency slots held
 *   P spend:<key>  hash, field UTC day number -> nano-USD spent and reserved that day
 *   P ticket:<t>   hash of an open ticket: key, token member, admission time, nano-USD reserved, day
 * Every structure expires on its own (window, lease, two days), so keys that stop calling leave nothing.
 */

/** Current time in ms: ARGV's when the caller injects a clock (tests), else the Redis server's, the one clock of the fleet. */
const NOW = `
local function clock(given)
  local now = tonumber(given)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`;

/**
 * KEYS: req, tok, conc, spend, ticket.
 * ARGV: now|'' ticket rpm|'' tpm|'' maxConcurrent|'' budget|'' tokens nanoUsd leaseMs windowMs concurrencyRetryMs
 *       retentionMs keyId.
 * Returns { admitted 1|0, code, limit, retryAfterMs, remainingRequests, resetRequestsMs, remainingTokens, resetTokensMs }
 * with -1 where the key has no such limit.
 */
export const ADMIT_SCRIPT = `${NOW}
local req, tok, conc, spend, ticketKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = clock(ARGV[1])
local ticket = ARGV[2]
local rpm, tpm, maxConcurrent, budget = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local tokens, nanoUsd = tonumber(ARGV[7]), tonumber(ARGV[8])
local leaseMs, windowMs, concurrencyRetryMs, retentionMs = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local day = math.floor(now / 86400000)

redis.call('ZREMRANGEBYSCORE', req, '-inf', now - windowMs)
redis.call('ZREMRANGEBYSCORE', tok, '-inf', now - windowMs)
redis.call('ZREMRANGEBYSCORE', conc, '-inf', now)

local function tokenEntries()
  local raw = redis.call('ZRANGE', tok, 0, -1, 'WITHSCORES')
  local entries = {}
  for i = 1, #raw, 2 do
    entries[#entries + 1] = { tonumber(raw[i + 1]), tonumber(string.match(raw[i], ':(%d+)$')) }
  end
  return entries
end

-- ms until the window of entries {at, amount} (oldest first) has room for amount more under limit
local function untilRoom(entries, amount, limit)
  if amount > limit then return windowMs end
  local total = 0
  for _, e in ipairs(entries) do total = total + e[2] end
  if total + amount <= limit then return 0 end
  for _, e in ipairs(entries) do
    total = total - e[2]
    if total + amount <= limit then return e[1] + windowMs - now end
  end
  return windowMs
end

-- the request window holds one entry per admission: the wait ends when the oldest surplus one leaves
local function requestsUntilRoom()
  if rpm < 1 then return windowMs end
  local count = redis.call('ZCARD', req)
  if count < rpm then return 0 end
  local oldest = redis.call('ZRANGE', req, count - rpm, count - rpm, 'WITHSCORES')
  return tonumber(oldest[2]) + windowMs - now
end

local function state()
  local remainingRequests, resetRequestsMs, remainingTokens, resetTokensMs = -1, -1, -1, -1
  if rpm then
    remainingRequests = math.max(0, rpm - redis.call('ZCARD', req))
    resetRequestsMs = requestsUntilRoom()
  end
  if tpm then
    local used, last = 0, nil
    for _, e in ipairs(tokenEntries()) do
      used = used + e[2]
      if e[2] > 0 then last = e[1] end
    end
    remainingTokens = math.max(0, tpm - used)
    resetTokensMs = last and (last + windowMs - now) or 0
  end
  return { remainingRequests, resetRequestsMs, remainingTokens, resetTokensMs }
end

local function refused(code, limit, retryAfterMs)
  local s = state()
  return { 0, code, limit, retryAfterMs, s[1], s[2], s[3], s[4] }
end

if redis.call('EXISTS', ticketKey) == 1 then
  local s = state()
  return { 1, '', '', 0, s[1], s[2], s[3], s[4] }
end

local spent = tonumber(redis.call('HGET', spend, day) or '0')
if budget and spent + nanoUsd > budget then
  return refused('insufficient_quota', 'budget', (day + 1) * 86400000 - now)
end
if rpm then
  local wait = requestsUntilRoom()
  if wait > 0 then return refused('rate_limit_exceeded', 'requests', wait) end
end
if tpm then
  local wait = untilRoom(tokenEntries(), tokens, tpm)
  if wait > 0 then return refused('rate_limit_exceeded', 'tokens', wait) end
end
if maxConcurrent and redis.call('ZCARD', conc) >= maxConcurrent then
  local first = redis.call('ZRANGE', conc, 0, 0, 'WITHSCORES')
  return refused('rate_limit_exceeded', 'concurrency', math.min(concurrencyRetryMs, tonumber(first[2]) - now))
end

local tokenMember = ticket .. ':' .. tokens
redis.call('ZADD', req, now, ticket)
redis.call('PEXPIRE', req, windowMs)
redis.call('ZADD', tok, now, tokenMember)
redis.call('PEXPIRE', tok, windowMs)
redis.call('ZADD', conc, now + leaseMs, ticket)
redis.call('PEXPIRE', conc, leaseMs)
redis.call('HINCRBY', spend, day, nanoUsd)
redis.call('HDEL', spend, day - 1)
redis.call('PEXPIRE', spend, retentionMs)
redis.call('HSET', ticketKey, 'key', ARGV[13], 'member', tokenMember, 'at', now, 'nano', nanoUsd, 'day', day)
redis.call('PEXPIRE', ticketKey, retentionMs)
local s = state()
return { 1, '', '', 0, s[1], s[2], s[3], s[4] }
`;

/**
 * KEYS: ticket. ARGV: prefix ticket usedTokens usedNanoUsd.
 * Consumes the ticket (so a second settle finds nothing), puts the used tokens in place of the
 * reserved ones at the admission's time, frees the slot and corrects that day's spend.
 */
export const SETTLE_SCRIPT = `
local open = redis.call('HMGET', KEYS[1], 'key', 'member', 'at', 'nano', 'day')
if not open[1] then return 0 end
redis.call('DEL', KEYS[1])
local prefix, ticket, usedTokens, usedNanoUsd = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local tok = prefix .. 'tok:' .. open[1]
if redis.call('ZREM', tok, open[2]) == 1 then redis.call('ZADD', tok, open[3], ticket .. ':' .. usedTokens) end
redis.call('ZREM', prefix .. 'conc:' .. open[1], ticket)
local spend = prefix .. 'spend:' .. open[1]
if redis.call('HEXISTS', spend, open[5]) == 1 then redis.call('HINCRBY', spend, open[5], usedNanoUsd - tonumber(open[4])) end
return 1
`;

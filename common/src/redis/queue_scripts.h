// The Lua scripts of the Redis Streams queue (redis_queue.cpp). Each runs atomically on the
// server; every key a script touches carries the stream's hash tag, so they work on a Redis
// Cluster too. Redis docs:
// https://redis.io/docs/latest/develop/interactive/programmability/eval-intro/
#pragma once

namespace atrex::redis_queue_scripts {

// KEYS: stream, counters. ARGV: max_length (0 = unbounded), body... Appends all bodies and
// counts them in one round trip; when they would pass max_length, appends none and returns
// -(current length) - 1 instead of the ids (backpressure).
constexpr const char* kEnqueue = R"lua(
local n = #ARGV - 1
local max = tonumber(ARGV[1])
if max > 0 then
  local len = redis.call('XLEN', KEYS[1])
  if len + n > max then return -len - 1 end
end
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'body', ARGV[i]) end
redis.call('HINCRBY', KEYS[2], 'enqueued', n)
return ids
)lua";

// KEYS: stream, counters, errors. ARGV: group, consumer, first id, last id, then (id,
// deliveries) per lease, ids ascending. Acks the leases still held as handed out (see
// kOwnerCheck) with one XPENDING over the id range and one XACK/XDEL/HDEL for all of them;
// returns how many.
constexpr const char* kAckBatch = R"lua(
local want = {}
local n = 0
for i = 5, #ARGV, 2 do want[ARGV[i]] = ARGV[i + 1]; n = n + 1 end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[4], n, ARGV[2])
local ids = {}
for _, e in ipairs(p) do
  local d = want[e[1]]
  if d and tonumber(e[4]) == tonumber(d) then ids[#ids + 1] = e[1] end
end
if #ids == 0 then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
redis.call('XDEL', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[3], unpack(ids))
redis.call('HINCRBY', KEYS[2], 'acked', #ids)
return #ids
)lua";

// KEYS: stream, dlq, errors, counters. ARGV: group, consumer, min_idle_ms, count,
// max_deliveries. Claims leases idle longer than the lease timeout; those past their deliveries
// become dead letters. Leases whose entry was deleted behind the queue's back are dropped from
// the pending list by XAUTOCLAIM itself (Redis >= 7.0 lists them as its third reply element):
// they are counted as `vanished` (their owner re-enqueues them, see kRequeueLost). Returns
// {id, body, deliveries} triples.
constexpr const char* kReclaim = R"lua(
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], '0-0', 'COUNT', ARGV[4])
if r[3] and #r[3] > 0 then
  redis.call('HINCRBY', KEYS[4], 'vanished', #r[3])
  redis.call('HDEL', KEYS[3], unpack(r[3]))
end
local out = {}
for _, e in ipairs(r[2]) do
  local id = e[1]
  local body = e[2][2]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  local deliveries = tonumber(p[1][4])
  if deliveries > tonumber(ARGV[5]) then
    local err = redis.call('HGET', KEYS[3], id)
    if not err then err = 'lease expired ' .. (deliveries - 1) .. ' times (runner lost?)' end
    redis.call('XADD', KEYS[2], '*', 'message_id', id, 'body', body, 'deliveries', deliveries - 1, 'error', err)
    redis.call('XACK', KEYS[1], ARGV[1], id)
    redis.call('XDEL', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id)
  else
    table.insert(out, {id, body, deliveries})
  end
end
return out
)lua";

// Ownership check shared by ack/renew/release: the entry must still be pending for this
// consumer with the delivery count the lease was handed out with.
constexpr const char* kOwnerCheck = R"lua(
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[3] or tonumber(p[1][4]) ~= tonumber(ARGV[4]) then return 0 end
)lua";

// KEYS: stream, counters, errors. ARGV: group, id, consumer, deliveries.
constexpr const char* kAckTail = R"lua(
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('HINCRBY', KEYS[2], 'acked', 1)
return 1
)lua";

// KEYS: stream. ARGV: group, id, consumer, deliveries.
constexpr const char* kRenewTail = R"lua(
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
)lua";

// KEYS: stream, dlq, errors. ARGV: group, id, consumer, deliveries, error, max_deliveries.
constexpr const char* kReleaseTail = R"lua(
if tonumber(ARGV[4]) >= tonumber(ARGV[6]) then
  local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
  local body = ''
  if #e > 0 then body = e[1][2][2] end
  redis.call('XADD', KEYS[2], '*', 'message_id', ARGV[2], 'body', body, 'deliveries', ARGV[4], 'error', ARGV[5])
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
  redis.call('HDEL', KEYS[3], ARGV[2])
else
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[5])
  -- A huge idle time makes the next claim's XAUTOCLAIM take it at once.
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'IDLE', 2000000000, 'JUSTID')
end
return 1
)lua";

// Stream id order ("ms-seq", both parts numeric; ms fits a Lua double exactly).
#define ATREX_LUA_ID_LE \
  "local function id_le(a, b)\n" \
  "  local am, as = string.match(a, '(%d+)-(%d+)')\n" \
  "  local bm, bs = string.match(b, '(%d+)-(%d+)')\n" \
  "  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)\n" \
  "  return am < bm or (am == bm and as <= bs)\n" \
  "end\n" \
  "local function last_delivered(stream, group)\n" \
  "  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do\n" \
  "    local name, last\n" \
  "    for i = 1, #g, 2 do\n" \
  "      if g[i] == 'name' then name = g[i + 1] end\n" \
  "      if g[i] == 'last-delivered-id' then last = g[i + 1] end\n" \
  "    end\n" \
  "    if name == group then return last end\n" \
  "  end\n" \
  "  return '0-0'\n" \
  "end\n"

// KEYS: stream. ARGV: group, id. 1 = queued (pending, or not yet delivered to the group),
// 0 = gone (no entry: acked, dead-lettered or deleted), 2 = stranded (an entry that was
// delivered but is pending for nobody: its consumer was deleted).
constexpr const char* kState = ATREX_LUA_ID_LE R"lua(
if #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then return 0 end
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) > 0 then return 1 end
if id_le(ARGV[2], last_delivered(KEYS[1], ARGV[1])) then return 2 end
return 1
)lua";

// KEYS: stream. ARGV: group. The bodies a claim can still deliver, in id order: entries
// pending for a consumer, or after the group's last-delivered id (a stranded entry is neither).
constexpr const char* kInFlight = ATREX_LUA_ID_LE R"lua(
local last = last_delivered(KEYS[1], ARGV[1])
local pending = {}
for _, p in ipairs(redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 2147483647)) do
  pending[p[1]] = true
end
local out = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  if #e[2] >= 2 and (pending[e[1]] or not id_le(e[1], last)) then out[#out + 1] = e[2][2] end
end
return out
)lua";

// KEYS: stream, counters, errors. ARGV: group, id, body. Removes what is left of message `id`
// (its pending entry, its stream entry, its last error) and appends `body` as a new message.
constexpr const char* kRequeueLost = R"lua(
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
local id = redis.call('XADD', KEYS[1], '*', 'body', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'enqueued', 1)
redis.call('HINCRBY', KEYS[2], 'lost', 1)
return id
)lua";

#undef ATREX_LUA_ID_LE

}  // namespace atrex::redis_queue_scripts

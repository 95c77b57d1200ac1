-- timers.lua: the timers of a queue: the heads of its locks, recurring, scheduled and
-- rate-limited sets (ratelimit.lua), and the promotion of due scheduled jobs to its work set.
--
-- Commands: none (helpers only).
-- Keys:
--   ql:q:<queue>-locks|recur|scheduled|ratelimited  zset (ZRANGE 0 0 WITHSCORES,
--                              ZRANGEBYSCORE, ZREM)
--   ql:q:<queue>-work          zset  (ZADD of promoted jobs)
--   ql:j:<jid>                 hash  (HMGET state priority, HSET state)

Q.mod.timers = function()
  local rcall = Q.rcall

  -- Lowest score of a queue's locks, recurring, scheduled and rate-limited sets (math.huge
  -- when empty).
  local KINDS = { 'locks', 'recur', 'scheduled', 'ratelimited' }
  Q.TIMER_KINDS = KINDS
  function Q.timer_heads(queue)
    local out = {}
    for i, kind in ipairs(KINDS) do
      local first = rcall('ZRANGE', Q.kq(queue, kind), 0, 0, 'WITHSCORES')
      out[i] = tonumber(first[2]) or math.huge
    end
    return out
  end

  -- Move up to `limit` due scheduled jobs into work (all due ones, bounded, if limit is nil).
  function Q.promote(now, queue, limit, wake)
    local key = Q.kq(queue, 'scheduled')
    local jids = rcall('ZRANGEBYSCORE', key, 0, now, 'LIMIT', 0, limit or Q.CHUNK)
    if #jids == 0 then return 0 end
    local moved = 0
    for _, jid in ipairs(jids) do
      -- (`state` tells the job exists: a lean record has no `priority` 0)
      local v = rcall('HMGET', Q.kjob(jid), 'state', 'priority')
      if v[1] then
        rcall('ZADD', Q.kq(queue, 'work'), Q.score(tonumber(v[2]) or 0, now), jid)
        rcall('HSET', Q.kjob(jid), 'state', 'waiting')
        moved = moved + 1
      end
    end
    Q.chunked('ZREM', key, jids)
    if wake and moved > 0 then Q.wake(queue) end
    return moved
  end
end

-- spawn.lua: spawning the children of a queue's due recurring jobs (pop, peek, reserve).
--
-- Commands: none (helpers only).
-- Keys:
--   ql:r:<jid>             hash  template (HMGET, HSET count)
--   ql:q:<queue>-recur     zset  recurring jids -> next spawn time (ZRANGEBYSCORE, ZADD)
--   ql:j:<jid>-<n>         hash  spawned children (EXISTS, HSET; history implied, history.lua)
--   ql:q:<queue>-work      zset  children (ZADD)
--   ql:t:<tag>, ql:tags    zset  children's tags (ZADD, ZINCRBY)
--   ql:config              hash  hidden field #due:<queue> (HGET/HSET), lean-job-records

Q.mod.spawn = function()
  local rcall = Q.rcall
  local floor = math.floor
  local C = Q.commands

  local RECUR_FIELDS = { 'klass', 'data', 'priority', 'tags', 'retries', 'interval', 'backlog',
    'throttles' }

  -- Spawn the due children of a queue's recurring jobs, at most `limit` in total.
  function Q.spawn(now, queue, limit, wake)
    local rkey = Q.kq(queue, 'recur')
    local due = rcall('ZRANGEBYSCORE', rkey, 0, now, 'WITHSCORES', 'LIMIT', 0, limit)
    local spawned = 0
    for i = 1, #due, 2 do
      if spawned >= limit then break end
      local rjid = due[i]
      local values = rcall('HMGET', KP .. 'r:' .. rjid, unpack(RECUR_FIELDS))
      if not values[1] then
        rcall('ZREM', rkey, rjid)
      else
        local klass, data, priority = values[1], values[2], tonumber(values[3]) or 0
        local tags = Q.list(values[4])
        local retries = tonumber(values[5]) or 0
        local interval = tonumber(values[6]) or 60
        local backlog = tonumber(values[7]) or 0
        local throttles = values[8]
        local s = floor(tonumber(due[i + 1]))
        if backlog ~= 0 and (now - s) / interval > backlog then
          s = s + math.ceil((now - s) / interval - backlog) * interval
        end
        local guard = 0
        while s <= now and spawned < limit and guard < Q.MAX_LIST do
          guard = guard + 1
          local n = rcall('HINCRBY', KP .. 'r:' .. rjid, 'count', 1)
          local child = rjid .. '-' .. n
          if rcall('EXISTS', Q.kjob(child)) == 0 then
            for _, tag in ipairs(tags) do Q.tag_add(child, tag, now) end
            -- (the put entry is implied by `time` + `queue`, history.lua; lean records as put's)
            local fields
            if Q.lean_records() then
              fields = { 'klass', klass, 'data', data, 'state', 'waiting', 'queue', queue,
                'retries', retries, 'time', Q.ftime(s), 'spawned_from_jid', rjid }
              if priority ~= 0 then
                table.insert(fields, 'priority'); table.insert(fields, priority)
              end
              if #tags > 0 then
                table.insert(fields, 'tags'); table.insert(fields, cjson.encode(tags))
              end
            else
              fields = { 'jid', child, 'klass', klass, 'data', data, 'priority', priority,
                'tags', cjson.encode(tags), 'state', 'waiting', 'worker', '', 'expires', 0,
                'queue', queue, 'retries', retries, 'remaining', retries,
                'time', Q.ftime(s), 'spawned_from_jid', rjid }
            end
            if throttles and throttles ~= '' then
              table.insert(fields, 'throttles'); table.insert(fields, throttles)
            end
            rcall('HSET', Q.kjob(child), unpack(fields))
            rcall('ZADD', Q.kq(queue, 'work'), Q.score(priority, s), child)
            spawned = spawned + 1
            s = s + interval
          end
        end
        rcall('ZADD', rkey, s, rjid)
      end
    end
    if wake and spawned > 0 then Q.wake(queue) end
    return spawned
  end
end

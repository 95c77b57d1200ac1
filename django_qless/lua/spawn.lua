-- spawn.lua: spawning the children of a queue's due recurring jobs (pop, peek, reserve); a
-- cron schedule's due ticks are spawned by cron.lua's Q.cron_spawn.
--
-- Commands: none (helpers only).
-- Keys:
--   ql:r:<jid>             hash  template (HMGET, HINCRBY count)
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
    'throttles', 'type', 'missed', 'bound', 'grace' }

  -- Read template `rjid`'s fields (nil if it is gone): what its children are made of.
  function Q.template(rjid)
    local v = rcall('HMGET', KP .. 'r:' .. rjid, unpack(RECUR_FIELDS))
    if not v[1] then return nil end
    return { klass = v[1], data = v[2], priority = tonumber(v[3]) or 0, tags = Q.list(v[4]),
      retries = tonumber(v[5]) or 0, interval = tonumber(v[6]) or 60,
      backlog = tonumber(v[7]) or 0, throttles = v[8], type = v[9],
      missed = v[10], bound = tonumber(v[11]) or 1, grace = tonumber(v[12]) or 0 }
  end

  -- Make template `rjid`'s next child (`t`: the template), put at time `s` into `queue`;
  -- false when that child's jid already names a job (the counter moves on regardless).
  function Q.spawn_child(now, queue, rjid, t, s)
    local n = rcall('HINCRBY', KP .. 'r:' .. rjid, 'count', 1)
    local child = rjid .. '-' .. n
    if rcall('EXISTS', Q.kjob(child)) == 1 then return false end
    local klass, data, priority, tags, retries = t.klass, t.data, t.priority, t.tags, t.retries
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
    if t.throttles and t.throttles ~= '' then
      table.insert(fields, 'throttles'); table.insert(fields, t.throttles)
    end
    rcall('HSET', Q.kjob(child), unpack(fields))
    rcall('ZADD', Q.kq(queue, 'work'), Q.score(priority, s), child)
    return child
  end

  -- Spawn the due children of a queue's recurring jobs, at most `limit` in total.
  function Q.spawn(now, queue, limit, wake)
    local rkey = Q.kq(queue, 'recur')
    local due = rcall('ZRANGEBYSCORE', rkey, 0, now, 'WITHSCORES', 'LIMIT', 0, limit)
    local spawned = 0
    for i = 1, #due, 2 do
      if spawned >= limit then break end
      local rjid = due[i]
      local t = Q.template(rjid)
      if not t then
        rcall('ZREM', rkey, rjid)
      elseif t.type == 'cron' then
        Q.need('lists,spawn,cron')
        spawned = spawned + Q.cron_spawn(now, queue, rjid, t, limit - spawned)
      else
        local interval, backlog = t.interval, t.backlog
        local s = floor(tonumber(due[i + 1]))
        if backlog ~= 0 and (now - s) / interval > backlog then
          s = s + math.ceil((now - s) / interval - backlog) * interval
        end
        local guard = 0
        while s <= now and spawned < limit and guard < Q.MAX_LIST do
          guard = guard + 1
          if Q.spawn_child(now, queue, rjid, t, s) then
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

-- recur.lua: recurring job templates (the spawning of their children is in spawn.lua).
--
--@ needs lists
--@ command recur
--@ command recur.get
--@ command recur.update
--@ command recur.tag
--@ command recur.untag
--@ command unrecur
--
-- Commands (after `now`):
--   recur        queue jid klass data 'interval' interval offset
--                [priority p] [tags JSON] [retries n] [backlog n] [throttles JSON] -> jid
--                (again for an existing jid: identical, nothing changes; changed, the template
--                is rewritten and keeps its next run, shifted by a change of interval)
--   recur.get    jid                                   -> JSON or nil
--   recur.update jid [priority|interval|retries|data|klass|queue|backlog|throttles value]... -> 1
--   recur.tag    jid tag...                            -> JSON tag list
--   recur.untag  jid tag...                            -> JSON tag list
--   unrecur      jid                                   -> 1
--
-- Keys:
--   ql:r:<jid>             hash  template: jid klass data priority tags state queue type count
--                                interval retries backlog [throttles]
--   ql:q:<queue>-recur     zset  recurring jids -> next spawn time
--   ql:queues              zset  (ZADD NX)
--   ql:j:<jid>-<n>         hash  spawned children (EXISTS, HSET; history implied, history.lua)
--   ql:q:<queue>-work      zset  children (ZADD)
--   ql:t:<tag>, ql:tags    zset  children's tags (ZADD, ZINCRBY)
--   ql:config              hash  hidden field #due:<queue> (HGET/HSET)
--   ql:rt:<jid>, ql:crons  a cron schedule's ticks and refill entry (unrecur DEL/ZREM; cron.lua)

Q.mod.recur = function()
  local rcall = Q.rcall
  local floor = math.floor
  local C = Q.commands

  local function recur_jid(v)
    return Q.jid(v, 'jid', 48)
  end

  local function interval_arg(v)
    local n = Q.number('interval', v)
    if n < 1 or n > 31536000 then
      Q.fail('Arg "interval" must be between 1 and 31536000: ' .. tostring(v))
    end
    return n
  end

  C['recur'] = { 'Recur', function(now, args)
    local queue = Q.queue(args[1])
    local jid = recur_jid(args[2])
    local klass = Q.klass(args[3])
    local data = Q.data(args[4])
    local spec = args[5]
    if spec == nil then Q.fail('Arg "spec" missing') end
    if spec ~= 'interval' then Q.fail('schedule type "' .. spec .. '" unknown') end
    local interval = interval_arg(args[6])
    local offset = Q.number('offset', args[7])
    if offset < 0 then Q.fail('Arg "offset" must be >= 0: ' .. tostring(args[7])) end
    local opts = Q.pairs_args(args, 8)
    local tags = opts.tags and Q.tags(opts.tags) or {}
    local priority = opts.priority and Q.priority(opts.priority) or 0
    local retries = opts.retries and Q.integer('retries', opts.retries, 0, 1000) or 0
    local backlog = opts.backlog and Q.integer('backlog', opts.backlog, 0, nil) or 0
    local throttles = opts.throttles and Q.throttles(opts.throttles) or {}
    local key = KP .. 'r:' .. jid
    local tags_text = cjson.encode(tags)
    local throttles_text = #throttles > 0 and cjson.encode(throttles) or false
    local old = rcall('HMGET', key, 'queue', 'count', 'type', 'klass', 'data', 'priority', 'tags',
      'interval', 'retries', 'backlog', 'throttles')
    if old[3] and old[3] ~= 'interval' then
      Q.fail('Recurring job ' .. jid .. ' is a ' .. old[3] .. ' schedule')
    end
    local count = tonumber(old[2]) or 0
    local at = now + offset
    if old[1] then
      -- Registered again (every deploy does): an identical template changes nothing, and a
      -- changed one keeps its next run (moved by the change of interval), so registering
      -- never spawns a child sooner than the schedule says. `offset` places new ones only.
      if old[1] == queue and old[4] == klass and old[5] == data
          and tonumber(old[6]) == priority and old[7] == tags_text
          and tonumber(old[8]) == interval and tonumber(old[9]) == retries
          and tonumber(old[10]) == backlog and (old[11] or false) == throttles_text then
        return jid
      end
      local score = tonumber(rcall('ZSCORE', Q.kq(old[1], 'recur'), jid))
      if score then at = score + interval - (tonumber(old[8]) or interval) end
      rcall('ZREM', Q.kq(old[1], 'recur'), jid)
    end
    local fields = { 'jid', jid, 'klass', klass, 'data', data, 'priority', priority,
      'tags', tags_text, 'state', 'recur', 'queue', queue, 'type', 'interval',
      'count', count, 'interval', interval, 'retries', retries, 'backlog', backlog }
    if throttles_text then
      table.insert(fields, 'throttles'); table.insert(fields, throttles_text)
    else
      rcall('HDEL', key, 'throttles')
    end
    rcall('HSET', key, unpack(fields))
    rcall('ZADD', Q.kq(queue, 'recur'), at, jid)
    Q.lower_due(queue, at)
    rcall('ZADD', K.queues, 'NX', now, queue)
    return jid
  end }

  C['recur.get'] = { 'Recur', function(now, args)
    local jid = recur_jid(args[1])
    local v = rcall('HMGET', KP .. 'r:' .. jid, 'klass', 'queue', 'priority', 'interval', 'retries',
      'count', 'data', 'tags', 'backlog', 'throttles')
    if not v[1] then return nil end
    local obj = {
      jid = jid, klass = v[1], state = 'recur', queue = v[2],
      priority = tonumber(v[3]) or 0, interval = tonumber(v[4]) or 0,
      retries = tonumber(v[5]) or 0, count = tonumber(v[6]) or 0, data = v[7],
      tags = Q.list(v[8]), backlog = tonumber(v[9]) or 0,
    }
    -- (as job objects: throttles only when there are some)
    local throttles = Q.list(v[10])
    if #throttles > 0 then obj.throttles = throttles end
    return cjson.encode(obj)
  end }

  C['recur.update'] = { 'Recur', function(now, args)
    local jid = recur_jid(args[1])
    local key = KP .. 'r:' .. jid
    local cur = rcall('HMGET', key, 'queue', 'interval', 'type')
    if not cur[1] then Q.fail('No recurring job ' .. jid) end
    local cron = cur[3] == 'cron'
    local sets, newq, newint = {}, nil, nil
    for i = 2, #args, 2 do
      local name, value = args[i], args[i + 1]
      if value == nil then Q.fail('No value provided for ' .. tostring(name)) end
      if name == 'priority' then
        table.insert(sets, name); table.insert(sets, Q.priority(value))
      elseif name == 'retries' then
        table.insert(sets, name); table.insert(sets, Q.integer('retries', value, 0, 1000))
      elseif name == 'backlog' then
        table.insert(sets, name); table.insert(sets, Q.integer('backlog', value, 0, nil))
      elseif name == 'interval' and cron then
        Q.fail('Recurring job ' .. jid .. ' is a cron schedule: it has no interval')
      elseif name == 'interval' then
        newint = interval_arg(value)
        table.insert(sets, name); table.insert(sets, newint)
      elseif name == 'data' then
        table.insert(sets, name); table.insert(sets, Q.data(value))
      elseif name == 'klass' then
        table.insert(sets, name); table.insert(sets, Q.klass(value))
      elseif name == 'queue' then
        newq = Q.queue(value)
        table.insert(sets, name); table.insert(sets, newq)
      elseif name == 'throttles' then
        table.insert(sets, name); table.insert(sets, cjson.encode(Q.throttles(value)))
      else
        Q.fail('Unrecognized option "' .. tostring(name) .. '"')
      end
    end
    local oldq = cur[1]
    if newint then
      local score = rcall('ZINCRBY', Q.kq(oldq, 'recur'), newint - (tonumber(cur[2]) or 0), jid)
      Q.lower_due(oldq, tonumber(score))
    end
    if newq and newq ~= oldq then
      local score = rcall('ZSCORE', Q.kq(oldq, 'recur'), jid)
      rcall('ZREM', Q.kq(oldq, 'recur'), jid)
      rcall('ZADD', Q.kq(newq, 'recur'), score or now, jid)
      Q.lower_due(newq, tonumber(score) or now)
      rcall('ZADD', K.queues, 'NX', now, newq)
    end
    if #sets > 0 then rcall('HSET', key, unpack(sets)) end
    return 1
  end }

  local function retag(op, now, args, add)
    local jid = recur_jid(args[1])
    local given = {}
    for i = 2, #args do table.insert(given, Q.tag_name(args[i])) end
    if #given > Q.MAX_LIST then Q.fail('at most ' .. Q.MAX_LIST .. ' tags') end
    local tags = rcall('HGET', KP .. 'r:' .. jid, 'tags')
    if not tags then error(op .. '(): Job ' .. jid .. ' does not exist') end
    local list, have = Q.list(tags), {}
    for _, t in ipairs(list) do have[t] = true end
    if add then
      for _, t in ipairs(given) do
        if not have[t] then
          have[t] = true
          table.insert(list, t)
        end
      end
      if #list > 50 then Q.fail('Arg "tags" has more than 50 entries') end
    else
      local drop, kept = {}, {}
      for _, t in ipairs(given) do drop[t] = true end
      for _, t in ipairs(list) do
        if not drop[t] then table.insert(kept, t) end
      end
      list = kept
    end
    local text = cjson.encode(list)
    rcall('HSET', KP .. 'r:' .. jid, 'tags', text)
    return text
  end

  C['recur.tag'] = { 'Tag', function(now, args) return retag('Tag', now, args, true) end }
  C['recur.untag'] = { 'Untag', function(now, args) return retag('Untag', now, args, false) end }

  C['unrecur'] = { 'Recur', function(now, args)
    local jid = recur_jid(args[1])
    local queue = rcall('HGET', KP .. 'r:' .. jid, 'queue')
    if queue then rcall('ZREM', Q.kq(queue, 'recur'), jid) end
    rcall('DEL', KP .. 'r:' .. jid, KP .. 'rt:' .. jid)  -- (a cron schedule's ticks, cron.lua)
    rcall('ZREM', KP .. 'crons', jid)
    return 1
  end }
end

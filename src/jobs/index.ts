// The eleven jobs, in the order of the schedule table (src/schedule.ts). One file per job,
// named as its path.
import type { JobDefinition } from "./job.ts";
import { weekrapportJob } from "./weekrapport.ts";
import { auditRetentieJob } from "./audit-retentie.ts";
import { beveiligingslogRetentieJob } from "./beveiligingslog-retentie.ts";
import { auditVerificatieJob } from "./audit-verificatie.ts";
import { backupStatusJob } from "./backup-status.ts";
import { dagrapportJob } from "./dagrapport.ts";
import { auditAnkerJob } from "./audit-anker.ts";
import { backupControleJob } from "./backup-controle.ts";
import { takenControleJob } from "./taken-controle.ts";
import { beveiligingslogAnalyseJob } from "./beveiligingslog-analyse.ts";
import { dbOnderhoudJob } from "./db-onderhoud.ts";

export const ALL_JOBS: JobDefinition<any>[] = [
  weekrapportJob,
  auditRetentieJob,
  beveiligingslogRetentieJob,
  auditVerificatieJob,
  backupStatusJob,
  dagrapportJob,
  auditAnkerJob,
  backupControleJob,
  takenControleJob,
  beveiligingslogAnalyseJob,
  dbOnderhoudJob,
];
